package npmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// SwaggerParser is the OpenAPI validator ValidateOpenAPI runs, and its
// pinned version.
const (
	SwaggerParser        = "@apidevtools/swagger-parser"
	SwaggerParserVersion = "13.1.0"
)

// validateScript validates the document at process.argv[1] with
// swagger-parser's validate(): the OpenAPI 3.0 or 3.1 schema of its
// version and $refs resolved (it does not check that path parameters are
// declared).
const validateScript = `
const SwaggerParser = require("@apidevtools/swagger-parser");
SwaggerParser.validate(process.argv[1])
  .then((api) => console.log("valid OpenAPI " + api.openapi))
  .catch((err) => { console.error(err.message); process.exit(1); });
`

// ValidateOpenAPI validates doc, an OpenAPI document in YAML or JSON,
// with swagger-parser (SwaggerParserVersion), installed when missing as
// Install does. It returns what the validator said, and an error when it
// found doc invalid.
func ValidateOpenAPI(tb testing.TB, doc []byte) (string, error) {
	tb.Helper()
	modules := Install(tb, SwaggerParser, SwaggerParserVersion)
	ext := ".yaml"
	if len(doc) > 0 && doc[0] == '{' {
		ext = ".json"
	}
	path := filepath.Join(tb.TempDir(), "openapi"+ext)
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		tb.Fatalf("npmtest: %v", err)
	}
	out, err := Node(tb, modules, validateScript, path)
	if err != nil {
		return out, fmt.Errorf("swagger-parser %s: the document is not valid: %w: %s", SwaggerParserVersion, err, out)
	}
	return out, nil
}
