"""runs.price_input_per_mtok, price_output_per_mtok, max_cost; run_spend

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 09:00:00

What a run costs, recorded as it happens: its token prices and its budget live on the run
(a resume may change them; they are not run settings and never change its hash), and what it
spent is one row per run and cell, added to by each commit of finished decisions.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: Union[str, Sequence[str], None] = '0007'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("price_input_per_mtok", sa.Float(), nullable=True))
        batch.add_column(sa.Column("price_output_per_mtok", sa.Float(), nullable=True))
        batch.add_column(sa.Column("max_cost", sa.Float(), nullable=True))
    op.create_table(
        "run_spend",
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("cell", sa.String(200), nullable=False),
        sa.Column("decisions", sa.BigInteger(), nullable=False),
        sa.Column("reads", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "cell"),
    )


def downgrade() -> None:
    op.drop_table("run_spend")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("max_cost")
        batch.drop_column("price_output_per_mtok")
        batch.drop_column("price_input_per_mtok")
