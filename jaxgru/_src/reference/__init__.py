"""The ``lax.scan`` ground truth of every primitive: scan.py drives, gru.py / lstm.py hold each
cell's math, layout.py what they share."""

from jaxgru._src.reference.layout import compute_dtype as compute_dtype
from jaxgru._src.reference.layout import plan_for as plan_for
from jaxgru._src.reference.scan import backward as backward
from jaxgru._src.reference.scan import forward as forward
from jaxgru._src.reference.scan import tangent as tangent
