"""The lab in a box (`box.py`: `make box`) and the scenarios the real-engine tests run in it, each
a function that e2e.engine.netns runs in a network namespace of its own by its name here
(`in_new_netns("box.whole_box_lifecycle", ...)`), with the programs the box's engine runs as the
project's `__main__.py`. A new scenario goes in the module of its topic."""
