"""``rlcore new plugin``: scaffold a plugin distribution from the cookiecutter template this distribution ships.

The template is package data (``rlcore_plugin_scaffold/templates/plugin``), so this works from an installed
wheel and offline. Cookiecutter (a dependency of rlcore-plugin-scaffold) is imported only here, when the
command runs. The template's own pre-generation hook checks the values (it runs for plain ``cookiecutter``
users too); this module checks only what cookiecutter would ignore or word obscurely: a misspelt variable
name, a switch that is not yes or no.
"""

from __future__ import annotations

import difflib
import json
import logging
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rlcore import __version__
from rlcore.api import API_VERSION, RLCoreError

#: the plugin template (a cookiecutter template directory)
PLUGIN_TEMPLATE = Path(__file__).parent / "templates" / "plugin"
#: the spellings of a yes/no switch that cookiecutter accepts
YES: tuple[str, ...] = ("yes", "y", "true", "t", "on", "1")
NO: tuple[str, ...] = ("no", "n", "false", "f", "off", "0")


class ScaffoldError(RLCoreError):
    """Bad ``key=value`` arguments, or a template that refused them; nothing was generated."""


def template_variables(template: Path = PLUGIN_TEMPLATE) -> dict[str, Any]:
    """The template's public variables and their defaults (``cookiecutter.json`` without ``_`` keys)."""
    context = json.loads((template / "cookiecutter.json").read_text(encoding="utf-8"))
    return {key: value for key, value in context.items() if not key.startswith("_")}


def parse_assignments(args: Iterable[str], variables: Mapping[str, Any]) -> dict[str, str | bool]:
    """``key=value`` arguments as a dict, yes/no switches as booleans.

    An unknown key (cookiecutter would ignore it) is an error with a suggestion, and so is a switch whose
    value is not yes or no.
    """
    values: dict[str, str | bool] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ScaffoldError(f"expected key=value, got {arg!r}; variables: {', '.join(variables)}")
        if key not in variables:
            close = difflib.get_close_matches(key, list(variables), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ScaffoldError(f"unknown template variable {key!r}.{hint} Variables: {', '.join(variables)}")
        if isinstance(variables[key], bool):
            if value.lower() not in YES + NO:
                raise ScaffoldError(f"{key} must be yes or no, got {value!r}")
            values[key] = value.lower() in YES
        else:
            values[key] = value
    return values


def default_values() -> dict[str, str]:
    """Defaults that follow the running rlcore: ``rlcore_min_version`` is its ``major.minor`` and
    ``rlcore_api`` the range of its plugin API's major version (``>=3,<4`` for API 3.x)."""
    major = int(API_VERSION.split(".")[0])
    return {"rlcore_min_version": ".".join(__version__.split(".")[:2]), "rlcore_api": f">={major},<{major + 1}"}


def new_plugin(values: Mapping[str, str | bool], *, no_input: bool, output_dir: Path) -> Path:
    """Render the plugin template into ``output_dir``; returns the new project's directory.

    ``values`` override the template's defaults (and, unless ``no_input``, become the defaults of the
    prompts). Raises :class:`ScaffoldError` when cookiecutter is missing, the project directory exists,
    or the template's checks reject the values (their messages are already on stderr).
    """
    try:
        from cookiecutter.exceptions import CookiecutterException, FailedHookException, OutputDirExistsException
        from cookiecutter.main import cookiecutter
    except ImportError as exc:
        raise ScaffoldError("rlcore new needs cookiecutter: pip install 'cookiecutter>=2.6'") from exc
    # cookiecutter logs a traceback when a hook fails; the hook's own message and ours are enough
    quiet = logging.NullHandler()
    log = logging.getLogger("cookiecutter")
    log.addHandler(quiet)
    try:
        project = cookiecutter(
            str(PLUGIN_TEMPLATE),
            no_input=no_input,
            extra_context={**default_values(), **values},
            output_dir=str(output_dir),
        )
    except FailedHookException as exc:
        raise ScaffoldError("the template rejected these values (see above); nothing was generated") from exc
    except OutputDirExistsException as exc:
        existing = str(exc).removeprefix("Error: ")  # 'Error: "<path>" directory already exists'
        raise ScaffoldError(f"{existing}; choose another plugin_name or --output-dir") from exc
    except CookiecutterException as exc:
        raise ScaffoldError(str(exc)) from exc
    finally:
        log.removeHandler(quiet)
    return Path(project)


def next_steps(project: Path, cwd: Path) -> list[str]:
    """The three commands that install the new project and run its tests, starting from ``cwd``."""
    project = project.resolve()
    try:
        where = str(project.relative_to(cwd.resolve()))
    except ValueError:
        where = str(project)
    return [f"cd {shlex.quote(where)}", "pip install -e '.[test]'", "pytest"]
