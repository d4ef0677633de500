"""decisions.content_hash: what a decision asks, hashed, to find a changed line under its id

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05 10:00:00

A submit of a line whose id the run already holds compares the line's content with the stored
decision's: equal, it is "already there"; different, it is reported as changed (and replaced
only when asked and not yet answered). The hash makes that comparison one short column per
decision instead of its whole payload. Rows written before this revision have none: their
hash is computed from their payload when a line under their id comes again.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: Union[str, Sequence[str], None] = '0005'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("decisions", sa.Column("content_hash", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("content_hash")
