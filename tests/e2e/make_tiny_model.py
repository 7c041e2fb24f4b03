"""Write a tiny random-weight Llama and its tokenizer into a directory (run with the e2e venv's python).

Nothing is downloaded: a byte-level BPE of a few hundred tokens is trained on a
few sentences with ``tokenizers``, and ``LlamaForCausalLM`` gets random weights
(hidden 128, 2 layers, 2 heads of dim 64, 1 KV head: about 0.5 MB). The text it
generates is gibberish; the engine around it (scheduler, KV cache, metrics) is real.

Usage: ``python make_tiny_model.py OUT_DIR``. Writes into ``OUT_DIR.tmp`` and
renames, so a half-written model is never mistaken for a cached one.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

SENTENCES = (
    "The guardian watches the engine and the engine serves the requests.",
    "A busy loop spins forever while the health check still answers two hundred.",
    "Tell me a story about the node, the guardian and its engine.",
    "Every request is scheduled, executed and streamed back to the client.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Numbers like 0 1 2 3 4 5 6 7 8 9 and words like hello world appear too.",
)
VOCAB_SIZE = 400
SPECIAL = ("<unk>", "<s>", "</s>")


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=512
    )


def build_model(vocab_size: int, bos_id: int, eos_id: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    return LlamaForCausalLM(cfg)


def write(out: Path) -> None:
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(tmp)
    model = build_model(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)
    model.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    write(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
