"""Single-active-consumer groups (``server/rabbitstream/state.py``) under any sequence of
joins, leaves and answers, plain and super stream partitions: never two members told they
are active at once, the active one always the group's choice once the answers are in, an
empty group forgotten."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.server.rabbitstream.state import StreamServer

KEY = ("/", "s-1", "app")


@dataclass(eq=False)
class Member:
    """A client: what it was last told, and the step down it has not answered yet."""

    name: int
    told: list[bool] = field(default_factory=list)

    def activate(self) -> None:
        self.told.append(True)

    def deactivate(self) -> None:
        self.told.append(False)

    @property
    def thinks_active(self) -> bool:
        return bool(self.told) and self.told[-1]


operations = st.lists(
    st.tuples(st.sampled_from(["join", "leave", "answer"]), st.integers(0, 5)),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(st.integers(-1, 4), operations)
def test_groups_keep_one_active_member(partition: int, ops: list[tuple[str, int]]) -> None:
    server = StreamServer(Broker(), UserStore())
    members: list[Member] = []
    pool = [Member(i) for i in range(6)]
    for op, index in ops:
        member = pool[index]
        if op == "join" and member not in members:
            members.append(member)
            server.join(*KEY, member, partition)
        elif op == "leave" and member in members:
            members.remove(member)
            server.leave(*KEY, member)
            member.told.clear()
        elif op == "answer":
            server.stepped_down(*KEY, member)  # ignored unless it is the one stepping down
        group = server.groups.get(KEY)
        if not members:
            assert group is None
            continue
        assert group is not None
        assert group.members == members
        assert sum(m.thinks_active for m in members) <= 1
        if group.active is not None:
            assert pool[pool.index(group.active)].thinks_active  # type: ignore[arg-type]
        if group.stepping_down is not None:
            assert group.active is None
            stepping = pool[pool.index(group.stepping_down)]  # type: ignore[arg-type]
            assert stepping.told[-1] is False
        else:
            # Nobody stepping down: the choice is active (and for a plain group, the first).
            expected = members[0] if partition < 0 else members[partition % len(members)]
            assert group.active is expected
