"""YAML a user hands to `ttsfleet render`: loaded safely, and refused early when hostile.

PyYAML's safe loader builds no objects of arbitrary classes, but it expands aliases:
nine nested lists of nine aliases each (a 414-byte "billion laughs") stand for
hundreds of millions of nodes, and whatever walks the result (validation, dumping)
pays for every one. So each document is first composed into PyYAML's node graph,
where an alias is one more pointer to a shared node and composing costs what the text
costs; the graph's size with every alias expanded is counted over it (each node once,
memoised); and only a document within the limits is constructed into Python objects.

Deep flow nesting (`[[[[...`) is refused before PyYAML sees the text: its scanner does
work proportional to the nesting for every token it reads ahead, so a megabyte of `[`
costs it minutes.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# A TTSService is a few kilobytes and a few hundred nodes; these leave room for long
# comments and big specs, and refuse in milliseconds what could cost minutes.
MAX_BYTES = 1024 * 1024
MAX_NODES = 20_000
MAX_DOCUMENTS = 100
# `[` and `{` open below one another, counted as written (inside quoted strings too): a
# TTSService needs a handful.
MAX_FLOW_DEPTH = 64
_BRACKETS = re.compile(r"[^\[\]{}]+")


class YamlInputError(ValueError):
    """The input is not YAML we will load; the message says why."""


class JsonCompatibleLoader(yaml.SafeLoader):
    """The safe loader, building only what JSON can say, as kubectl sends it to the API server:
    a timestamp stays a string, and `!!binary`, `!!set`, `!!omap` and `!!pairs` are refused."""

    yaml_constructors = {
        tag: constructor
        for tag, constructor in yaml.SafeLoader.yaml_constructors.items()
        if tag not in {f"tag:yaml.org,2002:{name}" for name in ("binary", "set", "omap", "pairs")}
    }


JsonCompatibleLoader.add_constructor(
    "tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str
)


def load_documents(text: str) -> list[Any]:
    """Every non-empty document of `text`, each checked before it is constructed."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BYTES:
        raise YamlInputError(f"the input is {size} bytes; at most {MAX_BYTES} are read")
    if flow_depth(text) > MAX_FLOW_DEPTH:
        raise YamlInputError(
            f"the input opens more than {MAX_FLOW_DEPTH} '[' or '{{' below one another"
        )
    loader = JsonCompatibleLoader(text)
    documents = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if len(documents) >= MAX_DOCUMENTS:
                raise YamlInputError(f"more than {MAX_DOCUMENTS} documents")
            nodes = expanded_size(node, MAX_NODES)
            if nodes > MAX_NODES:
                raise YamlInputError(
                    f"document {len(documents) + 1} expands to more than {MAX_NODES} nodes"
                    " (aliases that repeat aliases, a 'billion laughs'); write it out plainly"
                )
            document = loader.construct_document(node)
            if document is not None:
                documents.append(document)
    except YamlInputError:
        raise
    except yaml.YAMLError as error:
        raise YamlInputError(f"not valid YAML: {error}") from None
    except (ValueError, TypeError, ArithmeticError, LookupError) as error:
        # PyYAML's constructors fail so on a scalar its tag cannot hold (`!!int 0xZZ`, `!!float ''`).
        raise YamlInputError(f"not valid YAML: {error}") from None
    except RecursionError:
        raise YamlInputError("the input is nested too deeply") from None
    finally:
        loader.dispose()
    return documents


def flow_depth(text: str) -> int:
    """The deepest run of `[`/`{` not yet closed, over the raw text (quotes not excepted)."""
    depth = deepest = 0
    for bracket in _BRACKETS.sub("", text):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def expanded_size(root: yaml.Node, limit: int) -> int:
    """Nodes of the document once every alias is replaced by what it names (capped at limit + 1).

    Each distinct node is visited once, so the cost is the size of the text, not of the
    expansion. A node that contains itself (`&a [*a]`) expands without end.
    """
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            in_progress.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(child)] for child in _children(node)))
            continue
        if key in sizes:
            continue
        if key in in_progress:
            return limit + 1
        in_progress.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in in_progress:
                return limit + 1
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]
