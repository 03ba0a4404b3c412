"""Plots: one function per figure, each taking an Axes and data and returning artists."""
