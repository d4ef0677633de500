"""run_pauses: every pause of a run, kept after it goes on

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 11:00:00

``runs.pause_kind``/``pause_reason``/``paused_at`` hold only the current pause and are cleared
when the run goes on. ``run_pauses`` keeps one row per pause (its kind, reason, when it paused
and when it went on), so that ``dreads status`` and ``dreads report`` can say "1 pause by the
breaker (server unreachable), resumed" after the fact. Runs paused before this revision have
no rows.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: Union[str, Sequence[str], None] = '0009'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "run_pauses",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_run_pauses_run", "run_pauses", ["run_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_run_pauses_run", table_name="run_pauses")
    op.drop_table("run_pauses")
