"""Whether cuDNN loads, and which one. Apart from ``cudnn_conv``, which times it, so that ``device.software()``
can name the version without importing ``cudnn_conv``: that imports ``check`` and ``timing``, which import
``device``. This module imports no other harness module.
"""

from __future__ import annotations


def missing() -> str | None:
    """None when the frontend and a cuDNN library load; else one line saying what is missing."""
    try:
        import cudnn

        version = cudnn.backend_version()
    except Exception as err:  # ImportError, or the frontend present but no libcudnn to load
        return (
            f"cuDNN is not available ({type(err).__name__}: {err}); install the GPU extras: "
            f"pip install -r requirements-gpu.txt"
        )
    return None if version else "cuDNN frontend loaded but reports no backend version"


def version() -> str | None:
    """The cuDNN library the frontend loaded and the frontend's own version, as in "9.19.0 (frontend
    1.32.0)"; None where ``missing()`` says why not. A baseline's time depends on both."""
    if missing():
        return None
    import cudnn

    v = cudnn.backend_version()
    # cuDNN 9 encodes MAJOR * 10000 + MINOR * 100 + PATCH; cuDNN 8 encoded MAJOR * 1000 + MINOR * 100 + PATCH.
    major, rest = divmod(v, 10000) if v >= 90000 else divmod(v, 1000)
    return f"{major}.{rest // 100}.{rest % 100} (frontend {cudnn.__version__})"
