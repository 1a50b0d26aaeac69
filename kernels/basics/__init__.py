"""Kernels of chapter 0, "Your first kernels": the worked examples and the auto-checked exercises."""
