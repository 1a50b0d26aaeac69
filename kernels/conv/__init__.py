"""Direct 3x3 convolution, stage by stage (chapter "Convolution"): see common.py for the problems and layouts."""
