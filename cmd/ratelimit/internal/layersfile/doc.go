// Package layersfile reads what the ratelimit command is told of limits,
// once for all its subcommands: an algorithm by its full or short name
// (Algorithm), a policy's fields by name (SetPolicyField, which
// `simulate --policy` and a layers file both go through), and a layers
// file, YAML or JSON, into the httplimit.Flow a Go program would build
// (Parse), for `describe` and `openapi`. docs/command.md describes the
// file.
package layersfile
