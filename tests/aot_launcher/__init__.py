"""The AOT launcher (launcher.cpp) and its cases; docs/devices.md says how they run."""
