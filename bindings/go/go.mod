module discovm

go 1.19
