"""ssp-jax: Search Self-Play (and SvS) in pure JAX."""
from setuptools import find_packages, setup

setup(
    name="ssp-jax",
    version="0.1.0",
    description="Search Self-Play and SvS for LLM agents in pure JAX",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["ssp_jax", "ssp_jax.*", "models", "models.*",
                                    "retrieval", "retrieval.*"]),
    package_data={"retrieval": ["data/*"], "ssp_jax": ["data/*"]},
    install_requires=[
        # Lower bounds known to work: JAX 0.10 (CPU, CI) and 0.11 (the GPU machine).
        "jax>=0.10.0",
        "flax>=0.12.0",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11.0",
        "ml-collections>=1.0.0",
        "numpy>=1.26",
        "safetensors>=0.4.5",
        "tokenizers>=0.21",
        "transformers>=4.51",      # tokenizer chat templates; config.json parsing in tests
        "gguf>=0.17.0",            # reads the embedded default model (GGUF)
        "sentencepiece>=0.2.0",
        "faiss-cpu>=1.9.0",
        "bm25s>=0.2.10",
        "tensorboardX>=2.6",
        "tqdm>=4.66",
        "jinja2>=3.1",
        "sympy>=1.12",             # SvS answer checking: symbolic equality of math answers
        "matplotlib>=3.8",         # `ssp-jax plot`: PNG curves of metrics.jsonl (Agg backend)
        "math-verify>=0.7",        # SvS answer checking: the original's math_verify stage
        "pyarrow>=14",             # SvS data: the original's parquet files (verl schema)
    ],
    extras_require={
        # Parity references for the tests. torch==2.13.0 takes the CPU build.
        "test": ["pytest>=8.0", "pytest-xdist>=3.5", "torch==2.13.0", "transformers>=4.51",
                 "accelerate>=1.0",  # transformers needs it to load a GGUF (parity reference)
                 "tensorflow-datasets>=4.9", "array-record>=0.5"],
        # NQ-open / TriviaQA kept in TFDS: ArrayRecord data needs only tensorflow-datasets;
        # TFRecord data (the TFDS default) also needs TensorFlow.
        "tfds": ["tensorflow-datasets>=4.9", "array-record>=0.5", "tensorflow-cpu>=2.16"],
    },
    entry_points={"console_scripts": ["ssp-jax=ssp_jax.cli:main"]},
)
