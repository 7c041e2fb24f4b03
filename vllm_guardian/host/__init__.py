"""The only code that touches the machine: /proc, commands, process control, accelerators.

Each module takes its OS contact (root path, opener, runner) at construction, so
everything above it can be tested against fakes.
"""
