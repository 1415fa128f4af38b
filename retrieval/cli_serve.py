"""`ssp-jax retrieve serve`: serve an index directory over HTTP (POST /retrieve, GET /health).

  ssp-jax retrieve serve --index DIR [--host 127.0.0.1] [--port 8000]

Without --index it serves the default index (MiniLM over the embedded corpus, built on first use).
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
  sub = parser.add_subparsers(dest="retrieve_cmd", metavar="CMD")
  s = sub.add_parser("serve", help="serve an index over HTTP")
  s.add_argument("--index", default=None, help="index directory (default: the embedded default)")
  s.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 exposes it)")
  s.add_argument("--port", type=int, default=8000)
  s.add_argument("--encoder-path", default=None, help="local copy of the index's encoder")
  s.add_argument("--batch-size", type=int, default=256, help="query encoding batch size")
  s.add_argument("--max-queries", type=int, default=1024, help="queries per request")
  s.add_argument("--max-topk", type=int, default=100)
  s.add_argument("--max-query-chars", type=int, default=4096)
  s.add_argument("--threads", type=int, default=512,
                 help="connections served at once (more wait in a listen backlog of 2x this)")
  s.add_argument("--verbose", action="store_true", help="log every request")


def run(args: argparse.Namespace) -> int:
  if args.retrieve_cmd != "serve":
    print("usage: ssp-jax retrieve serve --index DIR [--host H] [--port P]", file=sys.stderr)
    return 2
  from retrieval.search import default_index_dir, load_retriever
  from retrieval.server import Limits, make_server
  index_dir = args.index or default_index_dir()
  kwargs = {"batch_size": args.batch_size}
  if args.encoder_path:
    kwargs["encoder_path"] = args.encoder_path
  retriever = load_retriever(index_dir, **kwargs)
  limits = Limits(max_queries=args.max_queries, max_query_chars=args.max_query_chars,
                  max_topk=args.max_topk, max_threads=args.threads,
                  backlog=max(128, 2 * args.threads))
  server = make_server(retriever, args.host, args.port, limits, args.verbose)
  host, port = server.server_address[:2]
  print(f"serving {index_dir} on http://{host}:{port} (POST /retrieve, GET /health)",
        file=sys.stderr, flush=True)
  try:
    server.serve_forever()
  except KeyboardInterrupt:
    pass
  finally:
    server.server_close()
  return 0
