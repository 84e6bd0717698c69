"""Tools above the service: the command line, launcher, benchmark, fuzzer, soak, replay, plots, experiments.

Nothing in the service (daemon, bridges, control core and below) imports from here.
"""
