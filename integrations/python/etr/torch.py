"""etr for PyTorch: record every op PyTorch runs (aten ops, autograd's backward functions,
torch.profiler.record_function scopes) with its inputs and outputs.

    import torch, etr.torch

    with etr.torch.trace("trace.json"):
        loss = model(x).sum()
        loss.backward()

The trace has the nodes PyTorch's own execution-trace observer writes for the same ops
(docs/TORCH.md of etr lists the differences). Needs the package built against libtorch
(Debian: libtorch-dev) and the same PyTorch at run time (Debian: python3-torch).
"""

import torch as _torch_lib  # noqa: F401  (loads libtorch before the integration)

import etr as _etr

try:
    from . import _torch
except ImportError as e:  # built without libtorch
    raise ImportError("etr was built without its PyTorch integration (libtorch-dev was not "
                      "found at build time): %s" % e) from None

__all__ = ["trace", "attach", "detach"]

attach = _torch.attach
detach = _torch.detach


class trace(_etr.trace):
    """etr.trace that also records PyTorch's ops: same arguments (path, timing=, schema=,
    flush_ms=, python_calls=)."""

    def __enter__(self):
        super().__enter__()
        _torch.attach()
        return self

    def __exit__(self, *exc):
        _torch.detach()
        return super().__exit__(*exc)
