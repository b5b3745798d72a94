"""The drafters: one module each (ar, ngram, block: glance and chain); decode/methods.py names them."""
