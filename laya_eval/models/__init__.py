"""The model: :class:`~laya_eval.models.layered.LayeredModel` (a backbone and a layer head), the four heads
and their removal fast paths, the frozen :class:`~laya_eval.models.trace.Trace` of one backbone pass, devices,
and the backbones (MLP, CNN, ViT, Hugging Face, any ``nn.Module`` by submodule names).

May import: errors, checks, catalog, output.
"""
