"""Fetches the test data the tokenizer, template and config tests read, for a checkout without ../shared beside it.

The data are llama.cpp's vocabulary-only GGUF files with its tokenizer test cases (`ggml-vocab-NAME.gguf`,
`.gguf.inp`, `.gguf.out`) and the chat templates of many model families (`*.jinja`), as vendored in the
llama-cpp-python sdist on PyPI (MIT, its LICENSE kept as vocab/LICENSE-llama.cpp). The sdist is pinned by
version and SHA-256; about 77 MB are downloaded once and 47 MB kept.

Writes DIR/vocab and DIR/templates (the layout of ../shared) and prints DIR. DIR is $KILN_TEST_DATA, else
~/.cache/kiln-test-data/llama-cpp-python-0.3.36. A DIR that is already complete is left as it is.
Standard library only.

Usage: python3 scripts/fetch-test-data.py
"""
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request

VERSION = "0.3.36"
URL = ("https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
       f"llama_cpp_python-{VERSION}.tar.gz")
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# The vocabularies the tests cover (../shared/README.md lists the same).
VOCABS = ["llama-spm", "llama-bpe", "qwen2", "qwen35", "gemma-4", "phi-3", "gpt-2", "deepseek-llm",
          "deepseek-coder", "falcon", "starcoder", "bert-bge"]
MODELS = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/models/"
LICENSE = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/LICENSE"
DONE = ".complete"


def target_dir():
    given = os.environ.get("KILN_TEST_DATA")
    if given:
        return given
    return os.path.join(os.path.expanduser("~"), ".cache", "kiln-test-data", f"llama-cpp-python-{VERSION}")


def wanted(name):
    """Where a member of the sdist goes under DIR, or None."""
    if name == LICENSE:
        return "vocab/LICENSE-llama.cpp"
    if not name.startswith(MODELS):
        return None
    rest = name[len(MODELS):]
    if rest.startswith("templates/") and rest.endswith(".jinja") and "/" not in rest[len("templates/"):]:
        return rest
    for v in VOCABS:
        if rest in (f"ggml-vocab-{v}.gguf", f"ggml-vocab-{v}.gguf.inp", f"ggml-vocab-{v}.gguf.out"):
            return "vocab/" + rest
    return None


def download(path):
    print(f"fetch-test-data: downloading {URL}", file=sys.stderr)
    digest = hashlib.sha256()
    with urllib.request.urlopen(URL, timeout=120) as r, open(path, "wb") as f:
        while chunk := r.read(1 << 20):
            digest.update(chunk)
            f.write(chunk)
    if digest.hexdigest() != SHA256:
        sys.exit(f"fetch-test-data: {URL} has SHA-256 {digest.hexdigest()}, expected {SHA256}")


def main():
    out = target_dir()
    if os.path.exists(os.path.join(out, DONE)):
        print(out)
        return
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent) as tmp:
        sdist = os.path.join(tmp, "sdist.tar.gz")
        try:
            download(sdist)
        except OSError as e:
            sys.exit(f"fetch-test-data: cannot download {URL}: {e}; check the network, or put the data at "
                     "$KILN_TEST_DATA (vocab/ and templates/, as in ../shared)")
        staged = os.path.join(tmp, "data")
        found = 0
        with tarfile.open(sdist) as t:
            for m in t:
                dest = wanted(m.name)
                if dest is None or not m.isfile():
                    continue
                path = os.path.join(staged, dest)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with t.extractfile(m) as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                found += 1
        missing = [v for v in VOCABS if not os.path.exists(os.path.join(staged, f"vocab/ggml-vocab-{v}.gguf"))]
        if missing:
            sys.exit(f"fetch-test-data: the sdist lacks the vocabularies {missing}")
        open(os.path.join(staged, DONE), "w").write(f"llama-cpp-python {VERSION} sdist, {found} files\n")
        if os.path.exists(out):
            shutil.rmtree(out)
        os.replace(staged, out)
    print(f"fetch-test-data: {found} files in {out}", file=sys.stderr)
    print(out)


if __name__ == "__main__":
    main()
