"""PANAMA for torch.distributed: ``import panama.distributed`` registers the backend ``"panama"``.

    import torch.distributed as dist
    import panama.distributed                      # registers "panama"
    dist.init_process_group(backend="panama")      # under torchrun (env://)
    model = torch.nn.parallel.DistributedDataParallel(model)   # unchanged

float32 SUM/AVG all_reduce goes through the PANAMA switch daemons, everything else through
an inner gloo group (:mod:`panama.distributed.backend`). The DDP communication hook on a
:class:`panama.Communicator` (without the backend): :mod:`panama.distributed.ddp_hook`; the
pinned staging of CUDA tensors both use: :mod:`panama.distributed.staging`. Discovery:
:func:`panama.runtime.cluster.find_or_start_cluster`; environment and job names:
:mod:`panama.runtime.worker.env`. Documentation: docs/training.md, section "torchrun".
"""

from panama.distributed.backend import (
    BACKEND_NAME,
    PanamaDistributedError,
    PanamaFabricError,
    PanamaProcessGroup,
    register,
    stats,
)
from panama.runtime.worker.env import EnvError

register()

__all__ = [
    "BACKEND_NAME",
    "EnvError",
    "PanamaDistributedError",
    "PanamaFabricError",
    "PanamaProcessGroup",
    "register",
    "stats",
]
