"""One typed job per command, called by both faces (the CLI and the Python API).

Each job takes a typed request, opens its inputs, checks everything (argument types, memory, shapes,
output folder) before the work, works, and stamps provenance; the faces only parse, call one job and
render. Defaults, checks and errors are therefore the same from Python and from the shell.
"""
