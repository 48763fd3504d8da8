"""torchaudio's Kaldi features for the reference, which imports them at import time.

torchaudio has no build for the torch this project runs (its last release, 2.11, refuses
to load next to a newer torch), so `torchaudio.compliance.kaldi` is given a stand-in whose
`fbank` is kaldi-native-fbank, a C++ port of Kaldi's own feature code with the same
options and defaults: the reference's x-vector features are still Kaldi's, computed by
code that is not ours. Installed before any reference module is imported
(support/reference_model.py, support/reference_25hz.py), since a module keeps the
`kaldi` it saw when imported.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import numpy as np

from support import reference


def _kaldi_fbank(
    waveform, num_mel_bins: int = 23, dither: float = 0.0, sample_frequency: float = 16000.0
):
    """torchaudio.compliance.kaldi.fbank for the arguments the reference passes (every
    other option at torchaudio's default, which is Kaldi's)."""
    import kaldi_native_fbank as knf
    import torch

    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = sample_frequency
    opts.frame_opts.dither = dither
    opts.mel_opts.num_bins = num_mel_bins
    # torchaudio's mel banks are Kaldi's (HTK mel scale, unnormalised triangles).
    opts.mel_opts.use_slaney_mel_scale = False
    opts.mel_opts.norm = ""
    # torchaudio floors the power spectrum at float32 epsilon before the log.
    opts.use_log_floor = True
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(sample_frequency, waveform.reshape(-1).double().tolist())
    fbank.input_finished()
    frames = [fbank.get_frame(i) for i in range(fbank.num_frames_ready)]
    return torch.from_numpy(np.array(frames, dtype=np.float32))


def install_kaldi_stand_in() -> None:
    """Make `import torchaudio.compliance.kaldi` give the kaldi-native-fbank stand-in."""
    reference.require("kaldi_native_fbank")
    if getattr(sys.modules.get("torchaudio.compliance.kaldi"), "fbank", None) is _kaldi_fbank:
        return
    names = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi")
    for name in names:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]
    sys.modules["torchaudio.compliance.kaldi"].fbank = _kaldi_fbank
