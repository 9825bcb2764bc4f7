"""Workloads beyond the thesis's ResNet-50, one plug-in package a folder (AlgoPerf's `workloads/`, torchtitan's
train specs): each brings its model, its data and its arithmetic (FLOPs a sample), and the trainers are to find
them by a loop over this package, never by name. A workload imports torch, numpy and `contract` only."""
