#!/usr/bin/python3
"""SentencePiece's BPE trainer (Debian's python3-sentencepiece) on the same corpus and vocabulary
size as `stg tokenizer train`, for docs/TOKENIZER.md; prints the wall time.

    /usr/bin/python3 tools/tok/spm_train.py CORPUS VOCAB MODEL_PREFIX [THREADS]

(/usr/bin/python3: Debian's python, which has the module.)

Every line of the corpus is a sentence (input_sentence_size=0: no sampling, all of them);
SentencePiece skips lines over max_sentence_length bytes (default 4192) and warns about them.
"""
import sys
import time

import sentencepiece as spm

corpus, vocab, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
args = dict(input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=vocab, num_threads=threads,
            input_sentence_size=0, shuffle_input_sentence=False, minloglevel=1)
print("SentencePieceTrainer.train(%s)" % ", ".join("%s=%r" % kv for kv in args.items()), flush=True)
t0 = time.time()
spm.SentencePieceTrainer.train(**args)
print("sentencepiece bpe: vocabulary %d in %.1f s wall" % (vocab, time.time() - t0))
