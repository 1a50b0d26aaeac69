"""Implicit GEMM convolution (chapter "Implicit GEMM"): cuDNN's walkthrough, then our own, step by step."""
