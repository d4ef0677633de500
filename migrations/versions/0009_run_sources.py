"""run_sources: the files each run was submitted from

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 06:00:00

``dreads submit`` and ``dreads run`` record the resolved absolute path of the job file they
read, one row per run and file, so that ``export -o``, ``report --html`` and ``calibrate -o``
refuse to write over a run's own job file (or the answer key beside it). Runs stored before
this revision have no rows: their files are not known by absolute path.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: Union[str, Sequence[str], None] = '0008'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "run_sources",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "path"),
    )


def downgrade() -> None:
    op.drop_table("run_sources")
