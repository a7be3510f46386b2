// Package snippets holds the test that builds every Go snippet of the
// README and of docs/*.md: each ```go block is a complete file, package
// clause and imports included, compiled against this repository.
package snippets
