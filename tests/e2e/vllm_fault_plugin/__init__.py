"""The fault plugin's folder as a package of the test tree, so its own unit tests import the plugin
module as ``tests.e2e.vllm_fault_plugin.guardian_vllm_fault_plugin``. The installed plugin is the
module alone (``py-modules`` in its pyproject.toml): this file is not part of it."""
