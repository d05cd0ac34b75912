"""Parse ``sacctmgr show assoc ... -P -n``: each account's fairshare part of the tree.

A record is one line; a last line without its newline was cut mid-record (complete_lines).
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.parse_text import complete_lines


def parse_sacctmgr_shares(raw: str) -> dict[str, float]:
    """``sacctmgr show assoc format=account,parentname,user,share -P -n`` -> {account: share}.

    Slurm weighs an association's share against its siblings' only (the sub-accounts and the
    users of the same parent account). Each account's share here is its part of the whole
    tree, in the units of the shares of root's children: an account's part of its parent's,
    times the part of it that its own users hold beside its sub-accounts (the jobs of a
    sub-account count as the sub-account's). In a flat tree (every account under root) that
    is the share sacctmgr shows. An account whose share is ``parent`` has no share of its
    own: Slurm reparents its users and sub-accounts to the first account above it whose share
    is a number, where they compete beside that account's own (sacctmgr(1), Fairshare); its
    part here is what its users hold there. A *user* whose share is ``parent`` is judged by
    its account's own fairshare (sacctmgr(1); sshare shows the account's NormShares on that
    user's row) without taking from its siblings: an account with one keeps its whole part.
    Users directly under root (Slurm's default user ``root``) are siblings of root's
    sub-accounts, as in every other account: their part is the account ``root``'s (with
    ``root||root|1`` beside teama 60 and teamb 40, root 1 of 101), so every share divides by
    the same sum Slurm's does. Root without such users (or with users of share 0 only),
    ``parent`` accounts without users and accounts none of whose ancestors reaches root are
    left out.
    """
    accounts: dict[str, tuple[str, float | None]] = {}  # account -> (parent, share or None)
    users: dict[str, float] = {}  # account -> its users' shares, summed
    parent_users: set[str] = set()  # accounts with a user whose share is `parent`
    for line in complete_lines(raw, "sacctmgr shares"):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 4:
            raise SlurmParseError("sacctmgr shares",
                                  f"expected account|parent|user|share: {line!r}")
        account, parent, user, share = (f.strip() for f in fields)
        if not account:
            continue
        try:
            value: float | None = float(share)
        except ValueError:
            if share.lower() != "parent":
                raise SlurmParseError("sacctmgr shares", f"bad share {share!r}") from None
            value = None
        if user:
            users[account] = users.get(account, 0.0) + (value or 0.0)
            if value is None:
                parent_users.add(account)
        else:
            accounts[account] = (parent, value)
    return _tree_shares(accounts, users, parent_users)


def split_by_cluster(raw: str) -> dict[str, str]:
    """``sacctmgr show assoc format=cluster,...`` -> cluster -> its lines without the cluster
    field (what parse_sacctmgr_shares reads)."""
    out: dict[str, list[str]] = {}
    for line in complete_lines(raw, "sacctmgr shares"):
        if line.strip():
            cluster, sep, rest = line.partition("|")
            if not sep:
                raise SlurmParseError("sacctmgr shares", f"expected cluster|...: {line!r}")
            out.setdefault(cluster.strip(), []).append(rest)
    return {cluster: "\n".join(lines) + "\n" for cluster, lines in out.items()}


def _tree_shares(accounts: Mapping[str, tuple[str, float | None]],
                 users: Mapping[str, float], parent_users: Set[str]) -> dict[str, float]:
    """Each account's part of the tree (parse_sacctmgr_shares), from account -> (parent, share;
    None for ``parent``), account -> its users' shares summed, and the accounts with a user
    whose share is ``parent``."""

    def pool(account: str) -> str | None:
        """Where the account's children compete: the account, or for a ``parent`` share the
        first account above it whose share is a number (root is); None for a loop."""
        seen: set[str] = set()
        while account != "root" and account in accounts and accounts[account][1] is None:
            if account in seen:
                return None
            seen.add(account)
            account = accounts[account][0]
        return account

    children: dict[str, float] = {}  # pool -> its sub-accounts' and users' shares, summed
    for account, (parent, value) in accounts.items():
        if account != "root" and value is not None and (at := pool(parent)) is not None:
            children[at] = children.get(at, 0.0) + value
    for account, value in users.items():
        if (at := pool(account)) is not None:
            children[at] = children.get(at, 0.0) + value
    whole: dict[str, float | None] = {"root": children.get("root", 0.0)}

    def part(account: str, seen: frozenset[str] = frozenset()) -> float | None:
        """The account's part of the tree (root's children's units); None: not reachable."""
        if account in whole:
            return whole[account]
        parent, value = accounts.get(account, ("", None))
        at = None if value is None or account in seen else pool(parent)
        if value is None or at is None:
            whole[account] = None
            return None
        above = part(at, seen | {account})
        siblings = children.get(at, 0.0)
        whole[account] = None if above is None or siblings <= 0 else above * value / siblings
        return whole[account]

    shares: dict[str, float] = {}
    for account, (_, value) in accounts.items():
        if account == "root":
            continue
        if value is None:  # no share of its own: its users hold their part of its pool
            at = pool(account) if account in users else None
            above = None if at is None else part(at)
            if at is not None and above is not None:
                below = children.get(at, 0.0)
                shares[account] = above * users[account] / below if below > 0 else 0.0
            continue
        mine = part(account)
        if mine is None:
            continue
        below = children.get(account, 0.0)
        own = users.get(account, 0.0)
        # an account with sub-accounts keeps its users' part; one without keeps it all
        # a user whose share is `parent` is judged by the account's own fairshare (sshare
        # shows the account's NormShares on that user's row): the account keeps its whole part
        keep_all = below <= 0 or own >= below or account in parent_users
        shares[account] = mine if keep_all else mine * own / below
    if users.get("root", 0.0) > 0:  # root's own users: the part root keeps of itself
        shares["root"] = users["root"]
    return shares
