"""lean queue storage: one partial status index on decisions, no stored per-draw probs

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 02:40:00

- ``decisions``: the two status indexes (``ix_decisions_lease`` on (status, lease_expires_at)
  and ``ix_decisions_run_status`` on (run_id, status)) are replaced by one partial index
  ``ix_decisions_open`` on (status, run_id, id) over the unsettled rows only (pending, queued,
  leased, failed). Settled rows (done, rejected, cancelled), the bulk of a finished run, add no
  entry to it, and every query of the sweeper, ``resume`` and ``cancel`` is a range of it.
- ``draws.probs``: dropped. It was the softmax of ``label_logprobs`` (stored next to it), so it
  is recomputed from the raw logprobs when needed.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: Union[str, Sequence[str], None] = '0001'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

OPEN = "status IN ('pending', 'queued', 'leased', 'failed')"


def upgrade() -> None:
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.drop_index('ix_decisions_lease')
        batch_op.drop_index('ix_decisions_run_status')
        batch_op.create_index('ix_decisions_open', ['status', 'run_id', 'id'], unique=False,
                              postgresql_where=sa.text(OPEN), sqlite_where=sa.text(OPEN))
    with op.batch_alter_table('draws', schema=None) as batch_op:
        batch_op.drop_column('probs')


def downgrade() -> None:
    with op.batch_alter_table('draws', schema=None) as batch_op:
        batch_op.add_column(sa.Column('probs', sa.JSON(), nullable=True))
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.drop_index('ix_decisions_open')
        batch_op.create_index('ix_decisions_run_status', ['run_id', 'status'], unique=False)
        batch_op.create_index('ix_decisions_lease', ['status', 'lease_expires_at'], unique=False)
