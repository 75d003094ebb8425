"""The preset: rlcore's contract suite (it changes the defaults, names only known keys, user overrides win)."""

from rlcore_testkit.contracts import PresetContract


class TestPresetContract(PresetContract):
    """rlcore's behavioural checks for ``rlcore run --preset {{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
