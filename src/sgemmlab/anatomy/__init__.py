"""What a rung costs, computed rather than typed: its bill (bill.py), occupancy
(occupancy.py), SASS instruction mix (sass.py) and predicted bound (predict.py), gathered by
report.py and shown by `sgemmlab inspect` (commands.py)."""
