"""Dynamic-shape benchmark: decoding and training over changing lengths against torch eager."""
