"""Whole-model benchmark: ms_aten.module against torch eager, time and memory, and profiles."""
