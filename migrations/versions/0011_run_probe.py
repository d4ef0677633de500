"""runs.probed_at: when a run paused by the breaker was last probed

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 11:00:00

A run paused by the breaker is probed with one read every ``DREADS_BREAKER_PROBE_S``; the
worker that takes a probe stamps ``probed_at`` with a guarded UPDATE, so N workers probe once
per interval, not N times. Null: not probed since it paused (or never paused).
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0011'
down_revision: Union[str, Sequence[str], None] = '0010'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("probed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("probed_at")
