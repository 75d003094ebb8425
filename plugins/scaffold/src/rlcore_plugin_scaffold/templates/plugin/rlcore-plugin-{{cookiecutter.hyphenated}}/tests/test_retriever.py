"""The document retriever: its ranking, and rlcore's contract suite."""

from rlcore_testkit.contracts import RetrieverContract
from rlcore_plugin_{{ cookiecutter.underscored }}.retriever import WordOverlapRetriever


def test_the_best_match_comes_first() -> None:
    (found,) = WordOverlapRetriever().retrieve(["capital of Germany"], 2)
    assert found[0].contents == "Berlin is the capital of Germany."


class TestRetrieverContract(RetrieverContract):
    """rlcore's behavioural checks for ``retriever: {{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
