module discovm-bench

go 1.19

require discovm v0.0.0

replace discovm => ../../../bindings/go
