"""Options derived from settings models: names, types, defaults and help come from the model."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import click
import pytest
from click.testing import CliRunner
from pydantic import Field

from panama.cli.options import model_from_options, model_options
from panama.runtime.settings import AddressSetting, ClusterConfig, ControllerConfig, SwitchConfig
from panama.settings import Settings


class Knobs(Settings):
    count: int = Field(3, ge=1, description="How many.")
    delay_s: float = Field(0.5, ge=0.0, description="Seconds to wait.")
    level: Literal["LOW", "HIGH"] = Field("LOW", description="Level.")
    where: AddressSetting = Field(("127.0.0.1", 0), description="Bind address.")
    out: Path | None = Field(None, description="Output file.")
    name: str = Field(description="Required name.")


@click.command()
@model_options(Knobs, aliases={"delay_s": ["--delay"]})
def knobs(**options):
    click.echo(repr(model_from_options(Knobs, options).model_dump()))


def test_options_come_from_the_model():
    runner = CliRunner()
    out = runner.invoke(knobs, ["--name", "x"])
    assert out.exit_code == 0, out.output
    assert eval(out.output) == {  # noqa: S307 - our own repr
        "count": 3,
        "delay_s": 0.5,
        "level": "LOW",
        "where": ("127.0.0.1", 0),
        "out": None,
        "name": "x",
    }
    out = runner.invoke(knobs, ["--name", "x", "--delay", "2", "--where", "10.0.0.1:5", "--level", "high"])
    assert out.exit_code == 0, out.output
    assert "'delay_s': 2.0" in out.output and "('10.0.0.1', 5)" in out.output and "'HIGH'" in out.output


def test_help_shows_description_and_default():
    text = CliRunner().invoke(knobs, ["--help"]).output
    for piece in ("--count", "How many.", "default: 3", "--delay-s", "--delay", "127.0.0.1:0", "--name", "required"):
        assert piece in text, (piece, text)


@pytest.mark.parametrize(
    "args,option",
    [(["--count", "0"], "--count"), (["--where", "nohost"], "--where"), ([], "--name")],
)
def test_bad_value_is_a_usage_error_naming_the_option(args, option):
    out = CliRunner().invoke(knobs, (["--name", "x"] if option != "--name" else []) + args)
    assert out.exit_code == 2
    assert option in out.output.strip().splitlines()[-1]


def test_the_daemons_options_are_their_settings_fields():
    """Every field of the runtime's settings models is an option of its command (declared once)."""
    from panama.cli.runtime_cmds import cluster_up, controller_serve, switch

    for command, model, not_options in (
        (switch, SwitchConfig, set()),
        (controller_serve, ControllerConfig, set()),
        (cluster_up, ClusterConfig, {"switch_drop_prob", "netns", "startup_timeout_s"}),
    ):
        names = {p.name for p in command.params}
        assert set(model.model_fields) - not_options <= names, (command.name, set(model.model_fields) - names)
        for param in command.params:
            if param.name in model.model_fields and param.name not in ("switch_id", "cluster_file"):
                field = model.model_fields[param.name]
                default = field.get_default(call_default_factory=True)
                shown = f"{default[0]}:{default[1]}" if isinstance(default, tuple) else default
                if command is not cluster_up or param.name in ClusterConfig.model_fields:
                    assert param.default == shown, (command.name, param.name)
