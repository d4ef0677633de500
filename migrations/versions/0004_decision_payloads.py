"""decision payloads apart: what a decision asks is written once, in its own table

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 12:00:00

A decision row is rewritten as it is queued, claimed and finished, and PostgreSQL writes a
whole new row version each time: the payload (the state text and the questions, most of a
row) was copied into every version. ``decision_payloads`` holds it once, keyed by the
decision; ``decisions.payload`` is dropped. Existing payloads are moved over.

The table has no foreign key to ``decisions``: a payload row is written by the same statement
sequence, in the same transaction, as its decision, and deleted with its run
(``app.store.admin.delete_run``), and a foreign key would add a lookup of the decision per
row written, a quarter of the database's work in a million-decision submit.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: Union[str, Sequence[str], None] = '0003'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        'decision_payloads',
        sa.Column('decision_id', _ID, nullable=False),
        sa.Column('payload', sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint('decision_id'),
    )
    op.execute("INSERT INTO decision_payloads (decision_id, payload) "
               "SELECT id, payload FROM decisions")
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.drop_column('payload')


def downgrade() -> None:
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('payload', sa.JSON(), nullable=True))
    op.execute("UPDATE decisions SET payload = (SELECT p.payload FROM decision_payloads p "
               "WHERE p.decision_id = decisions.id)")
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.alter_column('payload', existing_type=sa.JSON(), nullable=False)
    op.drop_table('decision_payloads')
