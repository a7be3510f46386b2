// Package picturedata is the shape of docs/img/monitoring.json: written by
// monitoring's picture test from a real Prometheus, drawn by the command's
// internal/picture package. One declaration, so writer and reader agree.
package picturedata

// Picture is what docs/img/monitoring.json holds: the title, one panel per
// range query, and the traffic's phases to shade.
type Picture struct {
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
	Marks  []Mark  `json:"marks"`
}

// A Panel is one plot: the series of one range query.
type Panel struct {
	Title  string   `json:"title"`
	Expr   string   `json:"expr"`
	Ratio  bool     `json:"ratio"` // the y axis runs from 0 to 1
	Series []Series `json:"series"`
}

// A Series is one limit's line: x in seconds since the traffic started, y
// null where the value is not a number.
type Series struct {
	Limit string     `json:"limit"`
	X     []float64  `json:"x"`
	Y     []*float64 `json:"y"`
}

// A Mark is a phase of the traffic, shaded on every panel.
type Mark struct {
	At   float64 `json:"at"`
	To   float64 `json:"to"`
	Text string  `json:"text"`
}
