"""The state store's rows of one daemon cycle: its decisions with their outcomes, the refusals
worth a row, and the ownership entries as the store keeps them."""

from __future__ import annotations

from collections.abc import Mapping

from slurm_hase.daemon.cycle import CycleResult, OwnedAttrs
from slurm_hase.store.state import DecisionRow


def refusal_rows(result: CycleResult, listed: set[str], before: Mapping[str, str]
                  ) -> tuple[list[DecisionRow], dict[str, str]]:
    """Rows for decisions the safety checks refused before planning (a Nice or constraint the
    user set, a held job, ...), each when it first happens and not again every cycle while it
    stands (`before`: last cycle's refusals); and this cycle's refusals."""
    reasons = {d.job_id: d.reason for d in result.decisions}
    now = {jid: why for jid, why in result.skipped if jid not in listed}
    rows = [DecisionRow(jid, result.inputs_digest, None, None, "skipped", why,
                        reason=reasons.get(jid, ""))
            for jid, why in now.items() if before.get(jid) != why]
    return rows, now


def owned_row(attrs: OwnedAttrs) -> tuple[int | None, str | None, int | None, str | None]:
    return (attrs.nice, attrs.features, attrs.prev_nice, attrs.prev_features)


def decision_rows(result: CycleResult, dry_run: bool) -> list[DecisionRow]:
    """The store's rows for one cycle: every planned update and every requeue the policy asked
    for, each with its outcome and the policy's reason."""
    reasons = {d.job_id: d.reason for d in result.decisions}
    skipped = dict(result.skipped)
    errors = dict(result.errors)
    outcome: dict[str, tuple[str, str]] = {jid: ("planned", "") for jid, _ in result.planned}
    if not dry_run:
        outcome.update({jid: ("skipped", why) for jid, why in result.skipped if jid in outcome})
        outcome.update({jid: ("applied", "ok") for jid, _ in result.applied})
        outcome.update({jid: ("error", err) for jid, err in result.errors})
    digest = result.job_digests
    rows = [DecisionRow(jid, digest.get(jid, result.inputs_digest), upd.nice, upd.features,
                        *outcome[jid], reason=reasons.get(jid, ""))
            for jid, upd in result.planned]
    after = dict(result.applied)  # a requeued job's Nice/Features, set right after
    requeued = set(result.requeued)
    for d in result.decisions:
        if not d.requeue:
            continue
        if d.job_id in requeued:
            done = ("applied", "ok")
        elif d.job_id in errors:
            done = ("error", errors[d.job_id])
        elif d.job_id in skipped:
            done = ("skipped", skipped[d.job_id])
        elif dry_run:
            done = ("planned", "")
        else:
            done = ("skipped", "not made: slurmctld became unavailable this cycle")
        upd = after.get(d.job_id)
        rows.append(DecisionRow(d.job_id, digest.get(d.job_id, result.inputs_digest),
                                upd.nice if upd else None, upd.features if upd else None, *done,
                                action="requeue", reason=d.reason))
    return rows
