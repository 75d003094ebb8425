"""Check the template's variables before anything is generated; exit 1 with one line per problem.

Cookiecutter renders this script with the chosen values, so it runs with whatever Python runs cookiecutter
and imports nothing but the standard library.
"""

from __future__ import annotations

import json
import re
import sys

CONTEXT: dict = json.loads({{ cookiecutter | tojson | tojson }})
PREFIX = "rlcore-plugin-"
#: lowercase letters and digits, with single "-" or "_" between them (a distribution and module name)
PLUGIN_NAME = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")
HYPHENATED = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)?$")
#: a PEP 440 version range: comma-separated clauses such as ">=1" and "<2"
CLAUSE = r"\s*(?:~=|==|!=|<=|>=|<|>)\s*\d+(?:\.\d+)*(?:\.\*)?\s*"
API_RANGE = re.compile(rf"^{CLAUSE}(?:,{CLAUSE})*$")
GITHUB_USER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$")


def name_problems(plugin_name: str, hyphenated: str, underscored: str) -> list[str]:
    """What is wrong with the plugin's name variables (each message names its variable)."""
    if not plugin_name:
        return ["plugin_name is empty: give the plugin's short name, e.g. 'myalgo' for rlcore-plugin-myalgo"]
    if plugin_name != plugin_name.lower():
        return [f"plugin_name {plugin_name!r} must be lowercase, e.g. {plugin_name.lower()!r}"]
    if plugin_name.replace("_", "-").rstrip("-") == PREFIX.rstrip("-"):
        return [f"plugin_name {plugin_name!r} is only the {PREFIX!r} prefix: add the plugin's own name"]
    if not PLUGIN_NAME.match(plugin_name):
        return [
            f"plugin_name {plugin_name!r} is not a valid distribution name here: use lowercase letters and "
            "digits with single '-' or '_' between them, e.g. 'my-algo'"
        ]
    short = plugin_name.replace("_", "-")
    short = short[len(PREFIX):] if short.startswith(PREFIX) else short
    if short.startswith(PREFIX):
        return [
            f"plugin_name {plugin_name!r} repeats the {PREFIX!r} prefix (the distribution would be "
            f"'{PREFIX}{short}'); give the name without it, e.g. {short[len(PREFIX):]!r}"
        ]
    problems = []
    if not HYPHENATED.match(hyphenated) or hyphenated.startswith(PREFIX):
        problems.append(
            f"hyphenated {hyphenated!r} must be lowercase letters and digits joined by single '-', without "
            f"the {PREFIX!r} prefix (default: {short!r})"
        )
    if underscored != hyphenated.replace("-", "_"):
        problems.append(f"underscored {underscored!r} must be hyphenated with '_' for '-': {hyphenated.replace('-', '_')!r}")
    return problems


def other_problems(context: dict) -> list[str]:
    """What is wrong with the version, the API range, the GitHub user and the component switches."""
    problems = []
    if not VERSION.match(context["rlcore_min_version"]):
        problems.append(f"rlcore_min_version {context['rlcore_min_version']!r} must look like '0.1' (major.minor)")
    if not API_RANGE.match(context["rlcore_api"]):
        problems.append(f"rlcore_api {context['rlcore_api']!r} must be a PEP 440 version range such as '>=3,<4'")
    if context["github_username"] and not GITHUB_USER.match(context["github_username"]):
        problems.append(f"github_username {context['github_username']!r} is not a GitHub user or organisation name")
    if not any(context[kind] for kind in context["_kinds"]):
        problems.append(
            "choose at least one component kind: set one of " + ", ".join(context["_kinds"]) + " to yes"
        )
    return problems


def main() -> int:
    """Print every problem to stderr; the exit status is 1 when there is one."""
    problems = name_problems(CONTEXT["plugin_name"], CONTEXT["hyphenated"], CONTEXT["underscored"])
    problems += other_problems(CONTEXT)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
