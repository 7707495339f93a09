"""Learning: training the latency transformer, and what judges and carries a trained model.

Installed as ``cdmpp.train``.  The modules, by job:

- training: :mod:`.train` (``cdmpp train``), :mod:`.config` (``TrainData``,
  ``TrainConfig``), :mod:`.lightning` (the ``LightningModule`` with the losses and the
  ``LightningDataModule``), :mod:`.fit`, :mod:`.devices` (one model over every device
  folder), :mod:`.splits` and :mod:`.folds` (held-out networks, leave-family-out folds),
  :mod:`.baselines` (the trees, the segment-sum MLP and the FLOPs baseline trained
  beside the transformer);
- adapting a trained model to a new device: :mod:`.adapt` (``cdmpp adapt``);
- judging a model: :mod:`.evaluate` (``cdmpp evaluate``), :mod:`.metrics`,
  :mod:`.uncertainty` (interval calibration), :mod:`.report` (tables, the model
  card) and :mod:`.plots`.

Evaluation, uncertainty and the reports stay here rather than in a package of their
own: each is defined by the training split (a checkpoint is scored on the held-out
network or fold it was trained without, and its intervals are calibrated on its own
validation workloads, which only the split knows), training itself writes their
tables and the model card, and ``cdmpp evaluate`` scores any checkpoint with the same
code that scores it at the end of training.  None of them is on the inference path:
:mod:`cdmpp.predictor` and :mod:`cdmpp.model` import nothing from this package.
"""
