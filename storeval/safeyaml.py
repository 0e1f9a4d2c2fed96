"""Reading YAML that cannot exhaust the machine or hide a mistake: every YAML storeval reads comes through here.

PyYAML's safe loader still expands aliases (nine aliases of nine aliases … is a "billion laughs" that took
180 s and 6 GB when the study was printed), recurses once per nesting level (50,000 levels: RecursionError)
and lets a repeated key silently replace the first. :class:`BoundedLoader` composes the document with three
limits and stops at the first breach with the line and column: aliases may add at most
:data:`MAX_ALIAS_NODES` nodes to the document, nesting is at most :data:`MAX_DEPTH` levels, and a key may
appear once per mapping (merge keys ``<<`` keep their meaning: explicit keys override merged ones).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode

MAX_DEPTH = 32  # a study is 6 levels deep; nothing storeval reads needs more
MAX_ALIAS_NODES = 10_000  # nodes that aliases may add in all: anchors for shared options, never a bomb
MAX_BYTES = 1 << 20  # a study is a few KiB
MERGE_TAG = "tag:yaml.org,2002:merge"


class Refused(yaml.MarkedYAMLError):
    """A document storeval will not read; ``problem`` says why and what to write instead, at ``problem_mark``."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def _key_text(node: Node) -> str:
    text = node.value if isinstance(node, ScalarNode) else f"<{node.id}>"
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


class BoundedLoader(yaml.SafeLoader):
    """The safe loader with bounded alias expansion and nesting, and no duplicate keys."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._sizes: dict[Node, int] = {}  # node -> nodes it stands for once every alias in it is expanded
        self._alias_nodes = 0
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            size = self._sizes.get(node)
            if size is None:
                raise Refused(f"the alias *{event.anchor} is used inside the node it names, which would contain "
                              "itself (write the value out)", event.start_mark)
            self._alias_nodes += size
            if self._alias_nodes > MAX_ALIAS_NODES:
                raise Refused(f"aliases expand to more than {MAX_ALIAS_NODES:,} values (nested aliases multiply; "
                              "write the values out or use fewer aliases)", event.start_mark)
            return node
        if self._depth >= MAX_DEPTH:
            raise Refused(f"nested more than {MAX_DEPTH} levels deep (a study needs about 6; flatten it)",
                          self.peek_event().start_mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, MappingNode):
            self._sizes[node] = 1 + sum(self._sizes[k] + self._sizes[v] for k, v in node.value)
        elif isinstance(node, ScalarNode):
            self._sizes[node] = 1
        else:
            self._sizes[node] = 1 + sum(self._sizes[v] for v in node.value)
        return node

    def compose_mapping_node(self, anchor: str | None) -> Node:
        node = super().compose_mapping_node(anchor)
        seen: dict[Any, Any] = {}
        for key, _ in node.value:
            if key.tag == MERGE_TAG or not isinstance(key, ScalarNode):
                continue
            try:  # 1, 0x1 and 1.0 are one key to Python as they are to the constructor
                ident = self.construct_object(key)
                hash(ident)
            except (yaml.YAMLError, TypeError):
                ident = (key.tag, key.value)
            if ident in seen:
                raise Refused(f"the key {_key_text(key)} appears twice in one mapping (first at line "
                              f"{seen[ident].line + 1}); keep one", key.start_mark)
            seen[ident] = key.start_mark
        return node


def load(text: str) -> Any:
    """The data of one YAML document; :class:`Refused` or another ``yaml.YAMLError`` if it cannot be read."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    except (ValueError, TypeError, OverflowError) as e:  # a tagged value its constructor rejects: !!int x
        raise yaml.YAMLError(f"a tagged value cannot be read: {e}") from None
    finally:
        loader.dispose()
