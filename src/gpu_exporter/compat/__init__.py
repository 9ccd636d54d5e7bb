"""The dcgm-exporter compatibility mode: everything that exists to be a drop-in for dcgm-exporter.

:mod:`.render` its families under the dcgm-exporter naming profile, :mod:`.fields` the DCGM field each
value stands for, :mod:`.devices` its ``-d`` device selection, :mod:`.pods` its pod labels, :mod:`.xid`
its Xid texts, :mod:`.counters` its counters CSV, :mod:`.configmap` a counters list from a Kubernetes
ConfigMap, :mod:`.field_names` DCGM's field names and ids (a data table) and :mod:`.flags` its flags.
These serve the dcgm-exporter mode, not the DCGM backend (``backends/dcgm/``).
"""
