# Declarations of panama/sim/placement.pyx, the C implementation of object placement (its
# pure-Python twin is placement.py; see its docstring). Nothing is cimported from it: the
# modules that place a type call on_cache_lines at import, on both paths.
