"""SSIM: the fused-kernel optimization worklog, version by version (chapter 2)."""
