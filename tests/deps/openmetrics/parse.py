"""Parses an OpenMetrics exposition read from stdin with prometheus_client's OpenMetrics parser
(strict: it refuses a page that is not valid OpenMetrics, e.g. without `# EOF`, with a counter
family named `..._total`, a non-canonical `+Inf`, unsorted buckets or a misplaced exemplar).

Prints one JSON object: {"families": {name: type}, "exemplars": [{"name", "labels",
"exemplar": {labels}, "value", "timestamp"}]}. Exits 1 with the parser's error on stderr.
"""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main():
    families = {}
    exemplars = []
    try:
        for family in text_string_to_metric_families(sys.stdin.read()):
            families[family.name] = family.type
            for sample in family.samples:
                if sample.exemplar is not None:
                    exemplars.append(
                        {
                            "name": sample.name,
                            "labels": sample.labels,
                            "exemplar": sample.exemplar.labels,
                            "value": sample.exemplar.value,
                            "timestamp": None
                            if sample.exemplar.timestamp is None
                            else float(sample.exemplar.timestamp),
                        }
                    )
    except Exception as e:  # the parser raises ValueError, and others on malformed input
        print(f"not valid OpenMetrics: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"families": families, "exemplars": exemplars}))


if __name__ == "__main__":
    main()
