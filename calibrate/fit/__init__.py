"""Fitting: candidate families, maximum likelihood, goodness of fit, FFT convolution, deconvolution of proxy passes
from end-to-end latencies, model files and fit reports."""
