"""runs.pause_kind, pause_reason, paused_at, breaker_after; attempts (run_id, id)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06 10:00:00

A run pauses (``runs.status`` paused) when the breaker finds most of its recent attempts
failing with the same upstream kind: the run records what paused it and why, and workers take
none of its decisions until ``resume``. The breaker reads a run's most recent attempts, newest
first: the index on (run_id, id) makes that a short range scan. ``breaker_after`` is the last
attempt id before a resume: the breaker counts only later attempts.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: Union[str, Sequence[str], None] = '0006'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("pause_kind", sa.String(32), nullable=True))
        batch.add_column(sa.Column("pause_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("breaker_after", sa.BigInteger(), nullable=True))
    op.create_index("ix_attempts_run_id", "attempts", ["run_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_attempts_run_id", table_name="attempts")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("breaker_after")
        batch.drop_column("paused_at")
        batch.drop_column("pause_reason")
        batch.drop_column("pause_kind")
