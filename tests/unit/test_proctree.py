"""The process tree is walked one way: root first, descendants breadth-first, each once."""

from __future__ import annotations

import pytest

from vllm_guardian.proctree import children_by_parent, walk

# pid -> ppid: 10 is the root; 11 and 12 its children; 13 a grandchild; 20 elsewhere
LINKS = {10: 1, 12: 10, 11: 10, 13: 11, 20: 1}


@pytest.mark.parametrize(
    "links, root, expected",
    [
        (LINKS, 10, [10, 11, 12, 13]),  # children ascending, one generation at a time
        (LINKS, 11, [11, 13]),
        (LINKS, 13, [13]),  # a leaf is its own tree
        (LINKS, 99, [99]),  # an unknown root: itself only
        ({0: 0, 5: 0}, 0, [0, 5]),  # a pid naming itself as parent is not its own child
        ({2: 3, 3: 2}, 2, [2, 3]),  # a loop in the links ends the walk
    ],
)
def test_a_tree_is_its_root_then_its_descendants_breadth_first(links, root, expected):
    assert walk(root, children_by_parent(links.items())) == expected


def test_children_can_be_read_one_process_at_a_time():
    kids = {10: [12, 11], 11: [13]}
    assert walk(10, lambda pid: kids.get(pid, [])) == [10, 12, 11, 13]


def test_children_are_grouped_by_parent_in_ascending_order():
    assert children_by_parent(LINKS.items()) == {1: [10, 20], 10: [11, 12], 11: [13]}
