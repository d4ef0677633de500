"""answer sources: a decision endpoint's answers, with the diagnostics it does not give as NULL

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-10 10:00:00

A run may be answered by a decision endpoint (``/v1/systemone``, ``/v1/decisions``): one
request per decision, one draw per question. Such an endpoint returns probabilities and some
diagnostics, not all, and what it does not return is stored as unavailable (NULL), never 0:

- ``answers``: ``label_mass``, ``min_label_mass``, ``argmax_is_label`` nullable; new
  ``endpoint_confidence`` (the confidence the endpoint reported).
- ``draws``: ``seed``, ``label_logprobs``, ``argmax_id``, ``argmax_is_label``, ``label_mass``
  nullable.
- ``attempts``: new ``usage`` (the endpoint's usage object for the attempt's request).
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: Union[str, Sequence[str], None] = '0002'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

_ANSWERS = (("label_mass", sa.Float()), ("min_label_mass", sa.Float()),
            ("argmax_is_label", sa.Boolean()))
_DRAWS = (("seed", sa.BigInteger()), ("label_logprobs", sa.JSON()), ("argmax_id", sa.Integer()),
          ("argmax_is_label", sa.Boolean()), ("label_mass", sa.Float()))


def upgrade() -> None:
    with op.batch_alter_table('answers', schema=None) as batch_op:
        for name, kind in _ANSWERS:
            batch_op.alter_column(name, existing_type=kind, nullable=True)
        batch_op.add_column(sa.Column('endpoint_confidence', sa.Float(), nullable=True))
    with op.batch_alter_table('draws', schema=None) as batch_op:
        for name, kind in _DRAWS:
            batch_op.alter_column(name, existing_type=kind, nullable=True)
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('usage', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_column('usage')
    with op.batch_alter_table('draws', schema=None) as batch_op:
        for name, kind in _DRAWS:
            batch_op.alter_column(name, existing_type=kind, nullable=False)
    with op.batch_alter_table('answers', schema=None) as batch_op:
        batch_op.drop_column('endpoint_confidence')
        for name, kind in _ANSWERS:
            batch_op.alter_column(name, existing_type=kind, nullable=False)
