"""`LoraDense`: a `keras.layers.Dense` whose LoRA adapters train alone, save as weights and merge."""

import contextlib
import gc

import keras
import numpy as np
from keras import ops

from bert_keras._platform.keras_private import freeze_for_good, thaw


@keras.saving.register_keras_serializable(package="bert_keras")
class LoraDense(keras.layers.Dense):
    """A `keras.layers.Dense` whose LoRA adapters train alone, save exactly and merge into the kernel.

    Keras' own `Dense.enable_lora(rank, lora_alpha)` adds `lora_kernel_a`
    `(in, rank)` and `lora_kernel_b` `(rank, out)`, and the layer computes
    `x @ (kernel + lora_alpha / rank * A @ B) + bias`. This subclass keeps
    that computation and adds what fine-tuning needs of it:

    - Only the adapters train: the kernel and the bias stay frozen when the
      layer (or a model holding it) is set `trainable = True`, which would
      make Keras' LoRA `Dense` train its kernel again.
    - Its weights save exactly: a weights file (`save_weights`, a `.keras`
      file, a training backup) holds the kernel, the bias, both adapters and
      `lora_alpha`, and they load back as they were. (Keras' LoRA `Dense`
      saves the merged kernel and zeroes both adapters on load, so a resumed
      run could not train them.) An ordinary `Dense`'s entries load into a
      LoRA layer as its kernel and bias with `B = 0` (`A` kept, so both still
      learn); a LoRA layer's load into one without LoRA as the merged kernel.
    - `merge_lora()` folds the adapters into the kernel and removes them.

    Without LoRA it is a `Dense` in everything but its name: the same
    variables, weights files and speed. Every projection of
    `MultiHeadSelfAttention` and `FeedForward` is one, so that
    `bert_keras.lora.enable_lora` can give it adapters.

    Args:
        **kwargs: `keras.layers.Dense` arguments (`units`, `lora_rank`,
            `lora_alpha`, ...).

    Example:
    >>> layer = LoraDense(3)
    >>> layer.build((None, 4))
    >>> layer.enable_lora(2, lora_alpha=4.0)
    >>> [w.name for w in layer.trainable_weights]
    ['lora_kernel_a', 'lora_kernel_b']
    >>> layer.trainable = False  # fine-tuning's phase 1, then phase 2:
    >>> layer.trainable = True  # Keras' LoRA Dense would train its kernel again
    >>> [w.name for w in layer.trainable_weights]
    ['lora_kernel_a', 'lora_kernel_b']
    >>> layer.merge_lora()
    >>> [w.name for w in layer.trainable_weights], layer.lora_enabled
    (['kernel', 'bias'], False)
    """

    @property
    def base_kernel(self):
        """The kernel variable itself (with LoRA, `kernel` is its sum with the adapters' product)."""
        return next(weight for weight in self.weights if weight.name == "kernel")

    @property
    def lora_weights(self):
        """`[lora_kernel_a, lora_kernel_b]`, or `[]` without LoRA."""
        return [self.lora_kernel_a, self.lora_kernel_b] if self.lora_enabled else []

    def enable_lora(self, rank, lora_alpha=None, a_initializer="he_uniform", b_initializer="zeros"):
        """Keras' `Dense.enable_lora`, with the kernel and the bias then frozen for good (only the adapters train)."""
        if lora_alpha is None and rank == self.lora_rank:
            # From the constructor (a config): Keras' `Dense.build` passes the rank alone.
            lora_alpha = self.lora_alpha
        super().enable_lora(rank, lora_alpha=lora_alpha, a_initializer=a_initializer, b_initializer=b_initializer)
        freeze_for_good(self, keep=self.lora_weights)

    def merge_lora(self):
        """Folds the adapters into the kernel and removes them: the layer is an ordinary `Dense` again.

        The kernel becomes `kernel + lora_alpha / lora_rank * A @ B`, computed
        in float32 (as Keras' LoRA `Dense` computes its kernel) and stored in
        the kernel's dtype; the kernel and the bias train again with the layer.
        """
        if not self.lora_enabled:
            raise ValueError(f"Cannot merge: layer {self.name!r} has no LoRA adapters. Call `enable_lora(rank)` first.")
        kernel = self.base_kernel
        merged = _merged_kernel(kernel, self.lora_kernel_a, self.lora_kernel_b, self.lora_alpha)
        kernel.assign(ops.cast(merged, kernel.dtype))
        with _collections_of_new_objects_only():
            del self.lora_kernel_a  # `Layer.__delattr__`: no longer a weight of the layer
            del self.lora_kernel_b
        self.lora_enabled = False
        self.lora_rank = None
        self.lora_alpha = None
        thaw(self)

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras quantizes a subclass of `Dense` only unchecked (its `call` might differ); this one computes as `Dense`.
        super().quantize(mode, type_check=False, config=config)

    def save_own_variables(self, store):
        if not self.lora_enabled or self.quantization_mode is not None:
            super().save_own_variables(store)
            return
        state = self._kernel_and_bias() + self.lora_weights + [np.array(self.lora_alpha, dtype="float64")]
        for index, value in enumerate(state):
            store[str(index)] = value

    def load_own_variables(self, store):
        base = self._kernel_and_bias()
        count = len(store.keys())
        if self.quantization_mode is not None or (count == len(base) and not self.lora_enabled):
            super().load_own_variables(store)
            return
        values = [np.asarray(store[str(index)]) for index in range(count)]
        if count == len(base):  # an ordinary Dense's entries: no change from the adapters until they train
            self._assign(base, values)
            self.lora_kernel_b.assign(ops.zeros(self.lora_kernel_b.shape))
            return
        if count not in (len(base) + 2, len(base) + 3):
            names = ", ".join(weight.name for weight in base)
            raise ValueError(
                f"Layer {self.name!r} expected {len(base)} entries ({names}) in the weights file, or with LoRA "
                f"{len(base) + 3} ({names}, lora_kernel_a, lora_kernel_b, lora_alpha). Received: {count}."
            )
        adapters = values[len(base):len(base) + 2]
        alpha = float(values[len(base) + 2]) if count == len(base) + 3 else None  # None: written before it was recorded
        if not self.lora_enabled:
            if alpha is None:
                raise ValueError(
                    f"Layer {self.name!r}: the weights file holds LoRA adapters without their alpha. Enable LoRA "
                    "as when the file was written (`bert_keras.lora.enable_lora`) before loading it."
                )
            merged = ops.cast(_merged_kernel(values[0], *adapters, alpha), base[0].dtype)
            self._assign(base, [merged] + values[1:len(base)])
            return
        rank = int(adapters[0].shape[-1])
        if rank != self.lora_rank or alpha not in (None, float(self.lora_alpha)):
            raise ValueError(
                f"Layer {self.name!r}: the weights file's LoRA has rank {rank} and lora_alpha {alpha}; this "
                f"layer's has rank {self.lora_rank} and lora_alpha {self.lora_alpha}. Enable LoRA alike before "
                "loading it."
            )
        self._assign(base + self.lora_weights, values[:len(base) + 2])

    def _kernel_and_bias(self):
        return [self.base_kernel] + ([self.bias] if self.bias is not None else [])

    def _assign(self, variables, values):
        for variable, value in zip(variables, values):
            variable.assign(value)


def _merged_kernel(kernel, lora_kernel_a, lora_kernel_b, lora_alpha):
    """`kernel + lora_alpha / rank * A @ B` in float32."""
    rank = lora_kernel_a.shape[-1]
    product = ops.matmul(ops.cast(lora_kernel_a, "float32"), ops.cast(lora_kernel_b, "float32"))
    return ops.add(ops.cast(kernel, "float32"), (lora_alpha / rank) * product)


@contextlib.contextmanager
def _collections_of_new_objects_only():
    """Inside, a full garbage collection looks only at the objects made inside.

    Keras' `Layer.__delattr__` runs `gc.collect()` after each variable it
    deletes, to free device memory at once; a full collection in a process
    that has imported TensorFlow takes 0.5-1 s (over 400,000 objects), 1-2
    minutes for the 144 adapters of BERT-Base with every target. The objects
    that exist before are set aside (`gc.freeze`) and given back after;
    a deleted adapter is freed by its reference count. Left alone when some
    other part of the process has set objects aside (e.g. before a fork).
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
