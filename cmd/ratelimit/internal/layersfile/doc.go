// Package layersfile reads what the ratelimit command is told of limits,
// once for all its subcommands: an algorithm by its full or short name
// (Algorithm) and a policy's fields by name (SetPolicyField), as
// `simulate --policy` gives them.
package layersfile
