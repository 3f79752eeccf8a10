# The sample plugin package is a distribution of its own: its tests run from tests/test_plugin_package.py, with it
# installed into a temporary folder, never collected as part of this suite.
collect_ignore = ["numpy_index"]
